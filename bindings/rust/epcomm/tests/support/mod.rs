//! Shared by the GPU tests: CUDA memory without linking CUDA, and the host model of a
//! low-latency step.
#![allow(dead_code)] // each test binary uses a different part

pub mod cuda_driver;
pub mod ll_model;
