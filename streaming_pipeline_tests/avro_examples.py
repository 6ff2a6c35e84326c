"""Avro schemas of example topics, for the tests that declare a source of their own."""

PAYMENT_VALUE = {
    "type": "record",
    "name": "Payment",
    "namespace": "example.payments",
    "fields": [
        {"name": "payment_id", "type": "long", "doc": "The payment."},
        {"name": "paid_at", "type": {"type": "long", "logicalType": "timestamp-micros"}},
        {"name": "amount", "type": ["null", "double"], "default": None, "doc": "Dollars."},
    ],
}
