"""What-if capacity planning for the CLI: sweep keys and points, running them in parallel, reports."""
