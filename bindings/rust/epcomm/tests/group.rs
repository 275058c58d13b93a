// SPDX-License-Identifier: Apache-2.0
//! Group and communicator calls that fail before touching a GPU, and the thread-safety
//! contract of the types (checked at compile time).

use epcomm::{Comm, Group, GroupConfig, Handle, Status, UniqueId};

#[test]
fn group_create_on_a_null_comm_is_an_invalid_argument() {
    let comm = unsafe { Comm::from_raw_unowned(std::ptr::null_mut()) };
    assert!(!comm.is_owned());
    let config = GroupConfig::new().num_experts(16).hidden(2048);
    let error = Group::create(&comm, &config).unwrap_err();
    assert_eq!(error.status(), Status::INVALID_ARGUMENT);
    assert!(error.message().contains("comm is NULL"), "{:?}", error.message());
    comm.close().expect("closing an adopted comm does nothing");
}

#[test]
fn comm_init_checks_the_rank() {
    let id = UniqueId::from_bytes([0; 128]);
    let error = Comm::init(&id, 2, 5, 0).unwrap_err();
    assert_eq!(error.status(), Status::INVALID_ARGUMENT);
    assert!(error.message().contains("rank"), "{:?}", error.message());
}

#[test]
fn comm_init_with_timeout_checks_the_rank_before_any_gpu_work() {
    let id = UniqueId::from_bytes([0; 128]);
    let error = Comm::init_with_timeout(&id, 2, 5, 0, 1000).unwrap_err();
    assert_eq!(error.status(), Status::INVALID_ARGUMENT);
    assert!(error.message().contains("rank is 5"), "{:?}", error.message());
}

// Compile-time: Group and Handle are Send but not Sync; Comm, GroupConfig and UniqueId are
// Send + Sync.
fn assert_send<T: Send>() {}
fn assert_sync<T: Sync>() {}

trait AmbiguousIfSync<A> {
    fn check() {}
}
impl<T: ?Sized> AmbiguousIfSync<()> for T {}
impl<T: ?Sized + Sync> AmbiguousIfSync<u8> for T {}

#[test]
fn thread_safety_of_the_types() {
    assert_send::<Group<'static>>();
    // Would be ambiguous, and fail to compile, if Group were Sync.
    <Group<'static> as AmbiguousIfSync<_>>::check();
    assert_send::<Handle<'static>>();
    <Handle<'static> as AmbiguousIfSync<_>>::check();
    assert_send::<Comm>();
    assert_sync::<Comm>();
    assert_send::<GroupConfig>();
    assert_sync::<UniqueId>();
}
