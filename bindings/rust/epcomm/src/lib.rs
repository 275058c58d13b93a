// SPDX-License-Identifier: Apache-2.0
//! Safe Rust API of epcomm, expert-parallel communication for Mixture-of-Experts models on
//! NCCL's Device API.
//!
//! The pieces, in the order a program meets them:
//! - [`version()`]: the loaded library's ABI version. The first call into the library also
//!   checks that its ABI major equals the one these bindings were generated for
//!   ([`BINDINGS_ABI`]) and fails with [`Status::ABI_MISMATCH`] otherwise.
//! - [`UniqueId`] and [`Comm`]: bootstrap an NCCL communicator without an NCCL binding
//!   ([`Comm::init`]; [`Comm::init_with_timeout`] bounds the wait for the other ranks), or
//!   adopt one your framework already has ([`Comm::from_raw_unowned`]).
//! - [`GroupConfig`] and [`plan_query()`]: what a configuration costs, on the CPU, before
//!   any GPU work.
//! - [`Group`]: the communicator's symmetric window and device communicator
//!   ([`Group::create`], [`Group::info`], [`Group::barrier`], [`Group::async_error`] (the
//!   group's failure without waiting), [`Group::close`]).
//! - [`TensorRef`] and [`StreamRef`]: borrowed device memory and CUDA streams, as the
//!   stream-ordered calls take them; made from a [`DevicePtr`] or [`RawStream`], which
//!   convert (`From`/`TryFrom`) from what cudarc, candle or a raw pointer hand out.
//! - [`Handle`]: one batch's routing on a group of either mode and its receive layout
//!   ([`HandleConfig`]: [`Layout`], [`Sizing`]), and the step it runs:
//!   [`Handle::create`] (with or without a [`Routing`]), [`Handle::update`],
//!   [`Handle::query`] ([`HandleInfo`]), [`Handle::dispatch`] (its tensors and options in a
//!   [`Dispatch`]), [`Handle::combine`] (in a [`Combine`]), [`Handle::complete`] (after a
//!   send-only call), [`Handle::close`].
//!
//! Every fallible call returns [`Result`]; an [`Error`] carries the library's [`Status`]
//! ([`Error::kind`] as an enum) and the detail message the library left for the calling
//! thread ([`Error::message`]), which names the struct and field at fault.
//!
//! Collective calls (every rank of the communicator must make them, in the same order) say
//! so in their docs, as the C header does. Dropping a [`Group`], a [`Handle`] or an owned
//! [`Comm`] without closing it still releases it, but ignores errors and never panics; call
//! `close()` to see them.

mod args;
mod comm;
mod config;
mod error;
mod flags;
mod group;
mod handle;
mod library;
mod open_enum;
mod plan;
mod raw;
mod status;
mod stream;
mod tensor;
mod types;
mod unique_id;
mod version;

pub use args::{Combine, Dispatch, Routing};
pub use comm::Comm;
pub use config::{GroupConfig, HandleConfig};
pub use error::{Error, ErrorKind, Result};
pub use flags::{CombineFlags, DispatchFlags, GroupFlags, HandleFlags};
pub use group::{Group, GroupInfo};
pub use handle::{Handle, HandleInfo};
pub use plan::{plan_query, Plan, PlanRegion};
pub use raw::{DevicePtr, RawStream};
pub use status::Status;
pub use stream::StreamRef;
pub use tensor::TensorRef;
pub use types::{Dtype, Layout, Mode, Overflow, Pending, Quant, RegionKind, ScaleLayout, Sizing, Weighting};
pub use unique_id::UniqueId;
pub use version::{version, Version, BINDINGS_ABI};

/// The raw declarations this crate is built on.
pub use epcomm_sys as sys;

// The README's examples are compiled (not run: they need GPUs) as doctests, so it cannot
// drift from the API.
#[cfg(doctest)]
#[doc = include_str!("../../README.md")]
struct ReadmeExamples;
