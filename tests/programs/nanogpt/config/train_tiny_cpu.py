# A tiny GPT trained on a CPU in seconds, for sweepq's tests. Not part of nanoGPT: a config file of
# the kind nanoGPT's own config/*.py are, which train.py runs through configurator.py
# (`python train.py config/train_tiny_cpu.py --key=value ...`) in train.py's own globals.
import os
import time

import torch

out_dir = 'out'
dataset = 'tiny'  # data/tiny/train.bin, val.bin and meta.pkl: written by the test, as nanoGPT's prepare.py does
device = 'cpu'
dtype = 'float32'
compile = False
n_layer = 1
n_head = 2
n_embd = 16
block_size = 16
batch_size = 4
dropout = 0.0
gradient_accumulation_steps = 1
learning_rate = 1e-3
max_iters = 20
lr_decay_iters = 20
warmup_iters = 2
min_lr = 1e-4
eval_interval = 5
eval_iters = 2
log_interval = 1
always_save_checkpoint = True

# Test scaffolding, so that a test acts on the script just after a checkpoint whatever the machine's
# speed: once train.py's torch.save has written a checkpoint, it waits while the file named by
# NANOGPT_HOLD exists (nothing is held when the variable is unset). The save itself is torch's.
if os.environ.get('NANOGPT_HOLD'):
    def _save_then_hold(obj, f, *args, _save=torch.save, **kwargs):
        _save(obj, f, *args, **kwargs)
        print(f'held after saving {f}', flush=True)
        while os.path.exists(os.environ['NANOGPT_HOLD']):
            time.sleep(0.02)

    torch.save = _save_then_hold
