// SPDX-License-Identifier: Apache-2.0
//! Handle calls (low-latency and high-throughput) against the real library without a GPU: a
//! group or handle pointer that is not a live object (zeroed memory, which has no live magic
//! word) must come back as INVALID_ARGUMENT with the library's message, through every
//! wrapper, and never crash.
//! The library checks the group or handle before any tensor, so the fake device addresses
//! below are never dereferenced.

use std::ffi::c_void;
use std::ptr::NonNull;

use super::*;
use crate::{Comm, Dtype, HtDispatch, HtHandle, HtSizing};

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

fn assert_not_live(result: Result<()>, what: &str, object: &str) {
    let error = result.expect_err(what);
    assert_eq!(error.status, Status::INVALID_ARGUMENT, "{what}: {error}");
    assert!(error.message.contains(&format!("not a live {object}")), "{what}: {:?}", error.message);
}

#[test]
fn create_on_a_dead_group_is_an_invalid_argument_with_the_library_message() {
    let comm = unsafe { Comm::from_raw_unowned(std::ptr::null_mut()) };
    let mut fake = FakeObject::new();
    let group = Group::wrap_for_test(fake.as_ptr(), &comm);
    let topk_idx = fake_device_tensor(Dtype::INT64, &[4, 2]);
    let error = Handle::create(&group, topk_idx, None).unwrap_err();
    assert_eq!(error.status, Status::INVALID_ARGUMENT);
    assert!(error.message.contains("group is not a live EpcGroup"), "{:?}", error.message);
    assert_eq!(error.to_string(), format!("invalid argument: {}", error.message));
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

    assert_not_live(handle.update(idx, None), "update", "EpcHandle");
    assert_not_live(
        handle.ll_dispatch(x, weights, out_x, counts, Flags::NONE, None),
        "dispatch",
        "EpcHandle",
    );
    assert_not_live(
        handle.ll_dispatch(x, weights, out_x, counts, Flags::SEND_ONLY, None),
        "send-only dispatch",
        "EpcHandle",
    );
    let fp8_x = fake_device_tensor(Dtype::FP8_E4M3, &[4, 256, 2048]);
    let scales = fake_device_tensor(Dtype::FP32, &[4, 256, 16]);
    assert_not_live(
        handle.ll_dispatch_fp8(x, weights, fp8_x, scales, counts, Flags::NONE, None),
        "fp8 dispatch",
        "EpcHandle",
    );
    assert_not_live(
        handle.ll_dispatch_fp8(
            x,
            weights,
            fp8_x,
            scales,
            counts,
            Flags::SEND_ONLY | Flags::FP8_POW2_SCALES,
            None,
        ),
        "send-only fp8 dispatch with power-of-two scales",
        "EpcHandle",
    );
    assert_not_live(handle.ll_combine(out_x, x, Flags::NONE, None), "combine", "EpcHandle");
    assert_not_live(handle.complete(None), "complete", "EpcHandle");
    // close reports the library's refusal instead of swallowing it.
    assert_not_live(handle.close(), "close", "EpcHandle");
}

#[test]
fn ht_create_on_a_dead_group_is_an_invalid_argument_with_the_library_message() {
    let comm = unsafe { Comm::from_raw_unowned(std::ptr::null_mut()) };
    let mut fake = FakeObject::new();
    let group = Group::wrap_for_test(fake.as_ptr(), &comm);
    let topk_idx = fake_device_tensor(Dtype::INT32, &[4, 2]);
    for sizing in [HtSizing::EXACT, HtSizing::CAPACITY] {
        let error = HtHandle::create(&group, topk_idx, sizing, None).unwrap_err();
        assert_eq!(error.status, Status::INVALID_ARGUMENT, "{sizing:?}");
        assert!(error.message.contains("group is not a live EpcGroup"), "{:?}", error.message);
    }
    drop(group);
}

#[test]
fn every_ht_call_on_a_dead_handle_is_refused_by_the_library() {
    let mut fake = FakeObject::new();
    let calls = Mutex::new(());
    let handle =
        HtHandle::wrap_for_test(RawHandle::wrap_for_test(fake.as_ptr(), &calls), 256, HtSizing::CAPACITY);
    assert_eq!((handle.rows(), handle.sizing()), (256, HtSizing::CAPACITY));
    let x = fake_device_tensor(Dtype::BF16, &[4, 2048]);
    let weights = fake_device_tensor(Dtype::FP32, &[4, 2]);
    let out_x = fake_device_tensor(Dtype::BF16, &[256, 2048]);
    let out_idx = fake_device_tensor(Dtype::INT32, &[256, 2]);
    let out_weights = fake_device_tensor(Dtype::FP32, &[256, 2]);
    let counts = fake_device_tensor(Dtype::INT32, &[4]);
    let num_recv = fake_device_tensor(Dtype::INT32, &[1]);
    let fp8_x = fake_device_tensor(Dtype::FP8_E4M3, &[4, 2048]);
    let scales = fake_device_tensor(Dtype::FP32, &[4, 16]);
    let out_fp8 = fake_device_tensor(Dtype::FP8_E4M3, &[256, 2048]);
    let out_scales = fake_device_tensor(Dtype::FP32, &[256, 16]);

    assert_not_live(handle.update(fake_device_tensor(Dtype::INT64, &[4, 2]), None), "update", "EpcHandle");
    assert_not_live(handle.dispatch(HtDispatch::new(x, out_x), None), "bare dispatch", "EpcHandle");
    let every_output = HtDispatch::new(x, out_x)
        .weights(weights, out_weights)
        .out_topk_idx(out_idx)
        .out_expert_counts(counts)
        .out_num_recv(num_recv);
    assert_not_live(handle.dispatch(every_output, None), "dispatch with every output", "EpcHandle");
    let fp8 = HtDispatch::new(fp8_x, out_fp8).fp8_scales(scales, out_scales).flags(Flags(0x80));
    assert_not_live(handle.dispatch(fp8, None), "fp8 dispatch", "EpcHandle");
    assert_not_live(handle.combine(out_x, None, x, None, Flags::NONE, None), "combine", "EpcHandle");
    assert_not_live(
        handle.combine(out_x, Some(out_weights), x, Some(weights), Flags::BACKWARD_WEIGHTS, None),
        "combine with backward weights",
        "EpcHandle",
    );
    assert_not_live(handle.close(), "close", "EpcHandle");
}

#[test]
fn dropping_a_dead_handle_does_not_panic() {
    let mut fake = FakeObject::new();
    let calls = Mutex::new(());
    let handle = Handle::wrap_for_test(fake.as_ptr(), &calls);
    drop(handle);
    let mut fake = FakeObject::new();
    drop(HtHandle::wrap_for_test(RawHandle::wrap_for_test(fake.as_ptr(), &calls), 0, HtSizing::EXACT));
}

#[test]
fn the_message_belongs_to_the_failing_call_of_this_thread() {
    // Fail on this thread, then on another; each sees only its own message.
    let mut fake = FakeObject::new();
    let calls = Mutex::new(());
    let handle = Handle::wrap_for_test(fake.as_ptr(), &calls);
    let error = handle.complete(None).unwrap_err();
    let other = std::thread::spawn(|| crate::plan_query(&crate::GroupConfig::new().num_experts(8), 2, 2, 1))
        .join()
        .unwrap()
        .unwrap_err();
    assert!(error.message.contains("EpcHandle"), "{:?}", error.message);
    assert!(other.message.contains("hidden"), "{:?}", other.message);
    std::mem::forget(handle); // the fake is refused anyway; skip the drop's library call
}
