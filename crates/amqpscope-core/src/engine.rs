//! The pipeline: packets → segments → TCP streams → frames → events. (In progress.)
