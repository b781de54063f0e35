"""The app's screens: the main live view and its small modal screens."""
