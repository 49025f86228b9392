"""Webhook notifications end to end: a real ``loch serve`` and real HTTP receivers."""
