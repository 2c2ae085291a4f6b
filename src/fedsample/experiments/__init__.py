"""Experiments: TOML configs, presets, the runner and its reports."""
