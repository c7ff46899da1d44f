"""What a session shows and writes: result rows, terminal and Markdown tables, files, plots, progress, exports."""
