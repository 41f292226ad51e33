"""SFT data from sessions: chat records, curation filters, analysis (``kernelfix export``)."""
