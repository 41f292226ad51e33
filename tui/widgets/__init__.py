"""The session screen's widgets."""
