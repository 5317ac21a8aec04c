//! What a stage holds compared to its backing dir, and how it is applied
//! (commit) or dropped (discard). Works on two directory fds: the backing
//! dir (the overlay's lower layer) and the stage's upper dir.
