// SPDX-License-Identifier: Apache-2.0
//! Shared by the GPU tests: CUDA memory without linking CUDA, one thread per rank, and the
//! host models of a low-latency and a high-throughput step.
#![allow(dead_code)] // each test binary uses a different part

pub mod cuda_driver;
pub mod ht_model;
pub mod ll_model;
pub mod ranks;
