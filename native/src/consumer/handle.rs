//! The librdkafka consumer behind one reader: made from the client configuration (librdkafka's
//! properties), with its consumer queue, and closed and destroyed when dropped.

use std::ffi::{c_char, CStr, CString};

use rdkafka_sys as rd;

use super::errors::ReadError;

pub(super) struct Handle(
    pub(super) *mut rd::rd_kafka_t,
    pub(super) *mut rd::rd_kafka_queue_t,
);

// librdkafka's handles are thread-safe; the reader uses them from one thread at a time.
unsafe impl Send for Handle {}

impl Drop for Handle {
    fn drop(&mut self) {
        unsafe {
            rd::rd_kafka_queue_destroy(self.1);
            rd::rd_kafka_consumer_close(self.0);
            rd::rd_kafka_destroy(self.0);
        }
    }
}

pub(super) unsafe fn new_consumer(config: &[(String, String)]) -> Result<Handle, ReadError> {
    let mut errstr = [0 as c_char; 512];
    let conf = rd::rd_kafka_conf_new();
    for (key, value) in config {
        let (k, v) = match (CString::new(key.as_str()), CString::new(value.as_str())) {
            (Ok(k), Ok(v)) => (k, v),
            _ => {
                rd::rd_kafka_conf_destroy(conf);
                return Err(ReadError::Config(format!("{key}: contains a NUL byte")));
            }
        };
        let res = rd::rd_kafka_conf_set(
            conf,
            k.as_ptr(),
            v.as_ptr(),
            errstr.as_mut_ptr(),
            errstr.len(),
        );
        if res != rd::rd_kafka_conf_res_t::RD_KAFKA_CONF_OK {
            rd::rd_kafka_conf_destroy(conf);
            return Err(ReadError::Config(text(&errstr)));
        }
    }
    // rd_kafka_new takes conf over only when it succeeds
    let rk = rd::rd_kafka_new(
        rd::rd_kafka_type_t::RD_KAFKA_CONSUMER,
        conf,
        errstr.as_mut_ptr(),
        errstr.len(),
    );
    if rk.is_null() {
        rd::rd_kafka_conf_destroy(conf);
        return Err(ReadError::Config(text(&errstr)));
    }
    rd::rd_kafka_poll_set_consumer(rk);
    let queue = rd::rd_kafka_queue_get_consumer(rk);
    Ok(Handle(rk, queue))
}

fn text(buf: &[c_char]) -> String {
    unsafe { CStr::from_ptr(buf.as_ptr()) }
        .to_string_lossy()
        .into_owned()
}
