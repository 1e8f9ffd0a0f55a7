"""Schedules: the synchronous step and the asynchronous loop, behind one ``Schedule`` interface
(``base``), sharing the validation pass (``validation``)."""
