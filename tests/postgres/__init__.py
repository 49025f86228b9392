"""Several ``loch serve`` replicas on one PostgreSQL database."""
