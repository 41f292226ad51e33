"""The app's screens: a session (live or from disk), the list of sessions, and the editing dialogs."""
