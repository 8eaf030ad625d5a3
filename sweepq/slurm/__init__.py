"""Workers on Slurm: `sweepq launch SPEC --on slurm` submits them as a job array (submit.py); each
job runs one worker (job.py) that honours Slurm's warnings and requeues itself while cells remain."""
