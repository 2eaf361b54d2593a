//! Connections: TCP flow events in, AMQP events out. (Port in progress.)
