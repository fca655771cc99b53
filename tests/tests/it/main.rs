//! Integration tests against the local AWS stack: one binary, one module per area (each extra
//! test binary costs a link on a 2-core machine).

mod alarms;
mod autopilot;
mod compaction;
mod control;
mod counter_dedupe;
mod counting_shapes;
mod directory;
mod fanout;
mod grants;
#[path = "../common/hostile.rs"]
mod hostile;
mod hostile_changes;
mod hung_calls;
mod kinesis_kpl;
mod kinesis_produce;
mod kinesis_reshard;
mod likes;
mod placement;
mod publish;
mod rebuild_repair;
mod scatter;
mod sim;
mod slots;
mod smoke_cloudwatch;
mod smoke_dynamodb;
mod smoke_kinesis;
mod stream;
mod stream_early;
mod stream_pages;
mod stream_start;
mod tap;
