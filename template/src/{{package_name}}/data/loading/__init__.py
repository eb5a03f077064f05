"""How pictures become batches: loaders, samplers, the batch path, caches and placement, GPU decoding, augmentation."""
