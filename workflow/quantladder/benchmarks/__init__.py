"""Task benchmarks: one small package per exam (items -> prompts -> parse -> score)."""
