//! Compiles `proto/connector.proto` with the protoc shipped by `protoc-bin-vendored`,
//! so a fresh machine builds without a system protoc.
//!
//! The `ConnectorService` client and server stubs are generated only with the `grpc`
//! feature, so a WebSocket-only build does not compile tonic.

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let protoc = protoc_bin_vendored::protoc_bin_path()?;
    // SAFETY: build scripts are single-threaded; nothing else reads the env concurrently.
    unsafe { std::env::set_var("PROTOC", protoc) };
    println!("cargo:rerun-if-changed=proto/connector.proto");
    let grpc = std::env::var_os("CARGO_FEATURE_GRPC").is_some();
    tonic_prost_build::configure()
        .build_client(grpc)
        .build_server(grpc)
        .build_transport(false)
        // `bytes::Bytes` for every bytes field: a payload decoded from a frame is a slice of
        // the frame's buffer, and handing it on (to a connector, to a response) copies nothing.
        .bytes(".")
        .compile_protos(&["proto/connector.proto"], &["proto"])?;
    Ok(())
}
