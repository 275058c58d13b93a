// SPDX-License-Identifier: Apache-2.0
//! Handle calls against the real library without a GPU: a group or handle pointer that is
//! not a live object (zeroed memory, which has no live magic word) must come back as
//! INVALID_ARGUMENT with the library's message, through every wrapper, and never crash.
//! The library checks the group or handle before any argument, so the fake device
//! addresses below are never dereferenced.

use std::ffi::c_void;
use std::ptr::NonNull;

use super::*;
use crate::{CombineFlags, Comm, Dtype, ErrorKind, GroupConfig, Quant, ScaleLayout, TensorRef, Weighting};

/// Zeroed, 8-byte aligned memory standing in for a C object: the library reads its first
/// word (the magic) and finds it dead.
struct FakeObject([u64; 8]);

impl FakeObject {
    fn new() -> Box<FakeObject> {
        Box::new(FakeObject([0; 8]))
    }

    fn as_ptr<T>(&mut self) -> NonNull<T> {
        NonNull::from(&mut self.0).cast()
    }
}

fn fake_device_tensor(dtype: Dtype, shape: &[i64]) -> TensorRef<'static> {
    let address = 0x7f00_0000_1000usize as *mut c_void;
    unsafe { TensorRef::from_raw_parts(address, dtype, shape) }.unwrap()
}

fn assert_not_live<T: std::fmt::Debug>(result: Result<T>, what: &str, object: &str) {
    let error = result.expect_err(what);
    assert_eq!(error.status(), Status::INVALID_ARGUMENT, "{what}: {error}");
    assert_eq!(error.kind(), ErrorKind::InvalidArgument, "{what}");
    assert!(error.message().contains(&format!("not a live {object}")), "{what}: {:?}", error.message());
}

#[test]
fn create_on_a_dead_group_is_an_invalid_argument_with_the_library_message() {
    let comm = unsafe { Comm::from_raw_unowned(std::ptr::null_mut()) };
    let mut fake = FakeObject::new();
    let group = Group::wrap_for_test(fake.as_ptr(), &comm);
    let topk_idx = fake_device_tensor(Dtype::INT64, &[4, 2]);
    let config = HandleConfig::new().layout(Layout::FLAT).sizing(Sizing::EXACT);
    let routing = Routing::new(topk_idx);
    for (config, routing) in
        [(None, None), (Some(&config), None), (None, Some(&routing)), (Some(&config), Some(&routing))]
    {
        let error = Handle::create(&group, config, routing, None).unwrap_err();
        assert_eq!(error.status(), Status::INVALID_ARGUMENT);
        assert!(error.message().contains("group is not a live EpcGroup"), "{:?}", error.message());
        assert_eq!(error.to_string(), format!("invalid argument: {}", error.message()));
    }
    // Dropping the fake group asks the library to destroy it: refused, ignored, no panic.
    drop(group);
}

#[test]
fn async_error_of_a_dead_group_is_an_invalid_argument_with_the_library_message() {
    let comm = unsafe { Comm::from_raw_unowned(std::ptr::null_mut()) };
    let mut fake = FakeObject::new();
    let group = Group::wrap_for_test(fake.as_ptr(), &comm);
    assert_not_live(group.async_error(), "async_error", "EpcGroup");
    drop(group);
}

#[test]
fn every_call_on_a_dead_handle_is_refused_by_the_library() {
    let mut fake = FakeObject::new();
    let calls = Mutex::new(());
    let handle = Handle::wrap_for_test(fake.as_ptr(), &calls);
    let x = fake_device_tensor(Dtype::BF16, &[4, 2048]);
    let weights = fake_device_tensor(Dtype::FP32, &[4, 2]);
    let out_x = fake_device_tensor(Dtype::BF16, &[4, 256, 2048]);
    let counts = fake_device_tensor(Dtype::INT32, &[4]);
    let idx = fake_device_tensor(Dtype::INT64, &[4, 2]);
    let fp8_x = fake_device_tensor(Dtype::FP8_E4M3, &[4, 256, 2048]);
    let scales = fake_device_tensor(Dtype::FP32, &[4, 256, 16]);
    let host_counts = fake_device_tensor(Dtype::INT32, &[4]);
    let acc = fake_device_tensor(Dtype::INT64, &[4]);

    assert_not_live(handle.update(&Routing::new(idx), None), "update", "EpcHandle");
    assert_not_live(handle.query(), "query", "EpcHandle");
    let bare = Dispatch::new(x, out_x).topk_weights(weights).out_expert_counts(counts);
    assert_not_live(handle.dispatch(&bare, None), "dispatch", "EpcHandle");
    assert_not_live(handle.dispatch(&bare.send_only(), None), "send-only dispatch", "EpcHandle");
    let fp8 = Dispatch::new(x, fp8_x)
        .quant(Quant::FP8)
        .scale_block(128)
        .scale_layout(ScaleLayout::STRIDED)
        .pow2_scales()
        .topk_weights(weights)
        .out_scales(scales)
        .out_expert_counts(counts)
        .out_expert_counts_host(host_counts)
        .acc_expert_counts(acc)
        .send_only();
    assert_not_live(handle.dispatch(&fp8, None), "send-only fp8 dispatch", "EpcHandle");
    let combine = Combine::new(out_x, x);
    assert_not_live(handle.combine(&combine, None), "combine", "EpcHandle");
    let backward = combine
        .weighting(Weighting::NONE)
        .topk_weights(weights)
        .out_topk_weights(weights)
        .flags(CombineFlags::SEND_ONLY);
    assert_not_live(handle.combine(&backward, None), "combine with weights", "EpcHandle");
    assert_not_live(handle.complete(None), "complete", "EpcHandle");
    // close reports the library's refusal instead of swallowing it.
    assert_not_live(handle.close(), "close", "EpcHandle");
}

#[test]
fn dropping_a_dead_handle_does_not_panic() {
    let mut fake = FakeObject::new();
    let calls = Mutex::new(());
    drop(Handle::wrap_for_test(fake.as_ptr(), &calls));
    // Nor with the group's lock poisoned by a panic on another thread.
    let poisoned = std::thread::scope(|scope| {
        scope
            .spawn(|| {
                let _held = calls.lock().unwrap();
                panic!("poison the lock");
            })
            .join()
            .is_err()
    });
    assert!(poisoned && calls.is_poisoned());
    let mut fake = FakeObject::new();
    drop(Handle::wrap_for_test(fake.as_ptr(), &calls));
}

#[test]
fn the_message_belongs_to_the_failing_call_of_this_thread() {
    // Fail on this thread, then on another; each sees only its own message.
    let mut fake = FakeObject::new();
    let calls = Mutex::new(());
    let handle = Handle::wrap_for_test(fake.as_ptr(), &calls);
    let error = handle.complete(None).unwrap_err();
    let other = std::thread::spawn(|| crate::plan_query(&GroupConfig::new().num_experts(8), 2, 2, 1))
        .join()
        .unwrap()
        .unwrap_err();
    assert!(error.message().contains("EpcHandle"), "{:?}", error.message());
    assert!(other.message().contains("hidden"), "{:?}", other.message());
    std::mem::forget(handle); // the fake is refused anyway; skip the drop's library call
}
