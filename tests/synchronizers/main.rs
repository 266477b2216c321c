//! The synchronizers against real servers: permits and counts checked from many tasks over
//! several clients and processes, and what Redis holds after every test.

mod latch;
mod lease_semaphore;
mod semaphore;
