"""[judge] The verdict in words: what a model reads after every judged turn (verdict_text.py), the build's report
(build_feedback.py), and the knowledge notes picked by a profile (knowledge.py; their text lives in kernelfix.prompts)."""
