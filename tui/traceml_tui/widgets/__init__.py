"""One widget per panel of the live view; each draws only what the screen hands it."""
