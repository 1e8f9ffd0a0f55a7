"""The Python API: ``optimize_anything`` runs an ordinary run whose evaluator is a callable in
the caller's process (trusted, not sandboxed)."""
