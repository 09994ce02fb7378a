//! Compiles `proto/connector.proto` with the protoc shipped by `protoc-bin-vendored`,
//! so a fresh machine builds without a system protoc.
//!
//! Only the messages are generated today: the gRPC transport is reserved (see
//! `transport::Address`), and generating the service stubs would pull tonic into
//! every connector author's build for code nothing calls yet.

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let protoc = protoc_bin_vendored::protoc_bin_path()?;
    // SAFETY: build scripts are single-threaded; nothing else reads the env concurrently.
    unsafe { std::env::set_var("PROTOC", protoc) };
    println!("cargo:rerun-if-changed=proto/connector.proto");
    tonic_prost_build::configure()
        .build_client(false)
        .build_server(false)
        // `bytes::Bytes` for every bytes field: a payload decoded from a frame is a slice of
        // the frame's buffer, and handing it on (to a connector, to a response) copies nothing.
        .bytes(".")
        .compile_protos(&["proto/connector.proto"], &["proto"])?;
    Ok(())
}
