"""What is measured: the dataset kinds' builders, the compute steps, nested batches, and
`CUDAPrefetcher` (the side-stream prefetcher)."""
