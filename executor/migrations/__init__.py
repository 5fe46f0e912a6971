"""The three migrations (DynaRL): workload (rollout requests), P2P (trainer state), reboot."""
