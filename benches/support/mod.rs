//! What only the cloud benchmark uses beside the test kit
//! (`remfile_testkit`): a range server that plays a cloud object store's
//! link.

pub mod cloud_server;
