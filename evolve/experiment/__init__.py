"""The experiment: its frozen config, the store (``runs/<name>/``), the append-only ledger, the lock, spending and
budgets, hardened git on worktrees, candidate identities, paid units, freezing and the audit."""
