"""The run spec and what it is made of: the TOML spec (`spec`), the presets it starts
from (`presets`, data in loadgen/presets/), what in it is secret (`secrets`), and its
pacing and cost tables with their arithmetic (`pacing`, `cost`)."""
