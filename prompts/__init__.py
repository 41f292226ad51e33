"""Prompt templates, as files beside this module (kernelfix.prompts)."""
