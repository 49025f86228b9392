"""Value model shared by every layer: content keys, content values and commit metadata."""
