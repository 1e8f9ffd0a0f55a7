"""Records over what is stored: export and import of a run, import of a GEPA run directory, and
the provenance ("blame") of each line of a candidate."""
