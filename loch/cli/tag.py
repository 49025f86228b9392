"""``loch tag``: list, create, delete and assign tags."""

from __future__ import annotations

from loch.cli.references import RefKind, reference_group

__all__ = ["tag"]

TAG = RefKind(
    type="TAG",
    noun="tag",
    examples={
        "group": "  loch tag\n  loch tag create v1.0\n  loch tag delete v1.0",
        "list": "  loch tag list\n  loch tag list -v\n  loch tag list --json",
        "create": "  loch tag create v1.0                # at the head of the default branch\n"
        "  loch tag create nightly etl\n"
        "  loch tag create before-fix main~1",
        "delete": "  loch tag delete v1.0\n  loch tag delete v1.0@1f0c2d9e",
        "assign": "  loch tag assign nightly etl         # move the tag to etl's head\n"
        "  loch tag assign v1.0@1f0c2d9e main",
    },
)

tag = reference_group(TAG)
