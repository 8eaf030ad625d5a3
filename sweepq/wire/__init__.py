"""What travels between the processes: attempt.json, the channel's typed messages, the template's requests."""
