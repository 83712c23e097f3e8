"""The dry run: accelerator chips, FLOPs, the ahead-of-time plan and the sharding table."""
