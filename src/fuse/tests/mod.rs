//! The FUSE layer driven without a kernel: the request decoder on
//! malformed input (`decoder`), INIT as kernels of several protocol
//! minors send it (`handshake`), and the serving loop over a scripted
//! device (`serve`).

mod decoder;
