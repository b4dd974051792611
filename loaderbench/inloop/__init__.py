"""Inside the user's own training loop: `loaderbench.watch` (`watcher.Watch`), timed with the same
engine and Trial assembly as the sweep's measuring process."""
