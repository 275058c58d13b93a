// SPDX-License-Identifier: Apache-2.0
//! Safe Rust API of epcomm, expert-parallel communication for Mixture-of-Experts models on
//! NCCL's Device API.
//!
//! The pieces, in the order a program meets them:
//! - [`version()`]: the loaded library's ABI version. The first call into the library also
//!   checks that its ABI major equals the one these bindings were generated for
//!   ([`BINDINGS_ABI`]) and fails with [`Status::ABI_MISMATCH`] otherwise.
//! - [`UniqueId`] and [`Comm`]: bootstrap an NCCL communicator without an NCCL binding
//!   ([`Comm::init`]), or adopt one your framework already has ([`Comm::from_raw_unowned`]).
//! - [`GroupConfig`] and [`plan_query()`]: what a configuration costs, on the CPU, before
//!   any GPU work.
//! - [`Group`]: the communicator's symmetric window and device communicator
//!   ([`Group::create`], [`Group::info`], [`Group::barrier`], [`Group::async_error`] (ABI
//!   1.3: the group's failure without waiting), [`Group::close`]).
//! - [`TensorRef`] and [`StreamRef`]: borrowed device memory and CUDA streams, as the
//!   stream-ordered calls take them.
//! - [`Handle`]: one batch's routing on a low-latency group, and the step it drives:
//!   [`Handle::ll_dispatch`] (or [`Handle::ll_dispatch_fp8`], FP8 on the wire),
//!   [`Handle::ll_combine`], [`Handle::complete`] (after a call with [`Flags::SEND_ONLY`]),
//!   [`Handle::update`] for the next step, [`Handle::close`].
//! - [`HtHandle`]: one batch's routing and layout on a high-throughput group (ABI 1.2),
//!   sized by [`HtSizing`], and the calls it drives, forward and backward:
//!   [`HtHandle::dispatch`] (its tensors in an [`HtDispatch`]), [`HtHandle::combine`]
//!   (with [`Flags::BACKWARD_WEIGHTS`] carrying weights back too), [`HtHandle::update`]
//!   (capacity-sized handles), [`HtHandle::close`].
//!
//! Every fallible call returns [`Result`]; an [`Error`] carries the library's [`Status`]
//! and the detail message the library left for the calling thread.
//!
//! Collective calls (every rank of the communicator must make them, in the same order) say
//! so in their docs, as the C header does. Dropping a [`Group`], a [`Handle`], an
//! [`HtHandle`] or an owned [`Comm`] without closing it still releases it, but ignores
//! errors; call `close()` to see them.

mod comm;
mod config;
mod error;
mod flags;
mod group;
mod handle;
mod ht_handle;
mod library;
mod open_enum;
mod plan;
mod status;
mod stream;
mod tensor;
mod types;
mod unique_id;
mod version;

pub use comm::Comm;
pub use config::GroupConfig;
pub use error::{Error, Result};
pub use flags::Flags;
pub use group::{Group, GroupInfo};
pub use handle::Handle;
pub use ht_handle::{HtDispatch, HtHandle};
pub use plan::{plan_query, Plan, PlanRegion};
pub use status::Status;
pub use stream::StreamRef;
pub use tensor::TensorRef;
pub use types::{Dtype, HtSizing, Mode, RegionKind};
pub use unique_id::UniqueId;
pub use version::{version, Version, BINDINGS_ABI};

/// The raw declarations this crate is built on.
pub use epcomm_sys as sys;

// The README's examples are compiled (not run: they need GPUs) as doctests, so it cannot
// drift from the API.
#[cfg(doctest)]
#[doc = include_str!("../../README.md")]
struct ReadmeExamples;
