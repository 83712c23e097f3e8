"""A run as it goes: the step loop, stop signals, progress, trackers and plots, and start-up timing."""
