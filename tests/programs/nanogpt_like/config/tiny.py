# A config file as nanoGPT's config/ folder holds them: plain assignments, exec'd by configurator.py.
out_dir = "out"
dataset = "tiny"
batch_size = 4
block_size = 8
