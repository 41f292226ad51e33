"""Headless batch repair: many sessions at once, resumable, with a report (``kernelfix batch``)."""
