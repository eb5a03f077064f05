"""The audit command and its own logic: findings, near copies, label checks, its pictures. Only the audit uses it."""
