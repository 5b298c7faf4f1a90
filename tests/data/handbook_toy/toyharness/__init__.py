"""A tiny harness used by the Handbook tests (never imported by them: the check reads it with ast)."""
