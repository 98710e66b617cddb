"""``metaq`` command line: a thin layer over the library. Each sub-module registers one command group."""
