"""The Dagster definitions, one home per asset, check, job and sensor, loaded by `load_from_defs_folder`."""
