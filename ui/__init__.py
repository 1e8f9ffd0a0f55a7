"""Small Streamlit UI components shared by the studio's pages (layout helpers, charts, state).

Layering: ``pages/`` → ``ui/`` → ``storage.queries`` / ``engine`` public functions → plain data.
Modules whose names say ``charts``/``lineage``/``analysis`` are pure (no Streamlit import) so
that the benchmark and unit tests can call them directly.
"""
