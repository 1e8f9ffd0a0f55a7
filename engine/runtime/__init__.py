"""The runtime model: predicted wall-clock and speed-up of a batch shape and schedule
(``model``), and a small simulation of a whole run (``sim``)."""
