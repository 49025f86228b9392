"""``loch branch``: list, create, delete and assign branches."""

from __future__ import annotations

from loch.cli.references import RefKind, reference_group

__all__ = ["branch"]

BRANCH = RefKind(
    type="BRANCH",
    noun="branch",
    examples={
        "group": "  loch branch\n  loch branch create etl\n  loch branch delete etl",
        "list": "  loch branch list\n  loch branch list -v\n"
        "  loch branch list --filter \"ref.name.startsWith('etl')\"\n"
        "  loch branch list --json | jq -r '.[].name'",
        "create": "  loch branch create etl               # at the head of the default branch\n"
        "  loch branch create fix main~2        # two commits back on main\n"
        "  loch branch create audit v1.0        # at a tag\n"
        "  loch branch create old 'main*2024-05-01T00:00:00Z'",
        "delete": "  loch branch delete etl\n  loch branch delete etl@1f0c2d9e tmp",
        "assign": "  loch branch assign etl main          # reset etl to main's head\n"
        "  loch branch assign etl main~1\n"
        "  loch branch assign etl@1f0c2d9e 7a3b9c0d  # only if etl is still at 1f0c2d9e",
    },
)

branch = reference_group(BRANCH)
