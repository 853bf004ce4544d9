"""Resource profiles of kernel configurations: devices, occupancy, compiled resources,
the analytic latency model and measurements."""
