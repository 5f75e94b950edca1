//! Window algorithms (fixed window, sliding window counter, sliding log). Being written.
