"""The attribute and metric names portable uses are the semantic conventions' own (the installed
opentelemetry-semantic-conventions package is the reference), where the conventions have one."""

from __future__ import annotations

from opentelemetry.semconv._incubating.attributes import (  # installed with opentelemetry-sdk
    aws_attributes,
    cloud_attributes,
    messaging_attributes,
    network_attributes,
)
from opentelemetry.semconv._incubating.metrics import messaging_metrics
from opentelemetry.semconv.attributes import error_attributes, server_attributes

from portable.telemetry import _otel


def test_attribute_names_are_the_conventions() -> None:
    assert {
        messaging_attributes.MESSAGING_SYSTEM,
        messaging_attributes.MESSAGING_OPERATION_TYPE,
        messaging_attributes.MESSAGING_OPERATION_NAME,
        messaging_attributes.MESSAGING_DESTINATION_NAME,
        messaging_attributes.MESSAGING_MESSAGE_ID,
        messaging_attributes.MESSAGING_BATCH_MESSAGE_COUNT,
        aws_attributes.AWS_S3_BUCKET,
        aws_attributes.AWS_S3_KEY,
        cloud_attributes.CLOUD_PROVIDER,
        cloud_attributes.CLOUD_REGION,
        error_attributes.ERROR_TYPE,
        server_attributes.SERVER_ADDRESS,
        server_attributes.SERVER_PORT,
        network_attributes.NETWORK_IO_DIRECTION,
    } == {
        "messaging.system", "messaging.operation.type", "messaging.operation.name", "messaging.destination.name",
        "messaging.message.id", "messaging.batch.message_count", "aws.s3.bucket", "aws.s3.key", "cloud.provider",
        "cloud.region", "error.type", "server.address", "server.port", "network.io.direction",
    }  # fmt: skip
    assert messaging_metrics.MESSAGING_CLIENT_SENT_MESSAGES == "messaging.client.sent.messages"
    assert messaging_metrics.MESSAGING_CLIENT_CONSUMED_MESSAGES == "messaging.client.consumed.messages"


def test_values_are_the_conventions_where_they_have_one() -> None:
    systems = {v.value for v in messaging_attributes.MessagingSystemValues}
    # Azure Storage Queues have no value in the conventions (Service Bus and Event Hubs do)
    assert {v for v in _otel.MESSAGING_SYSTEMS.values() if v != "azure_queue"} <= systems
    assert "azure_queue" not in systems
    assert set(_otel.MESSAGING_TYPES.values()) <= {v.value for v in messaging_attributes.MessagingOperationTypeValues}
    assert set(_otel.CLOUDS.values()) <= {v.value for v in cloud_attributes.CloudProviderValues}
    assert {"transmit", "receive"} == {v.value for v in network_attributes.NetworkIoDirectionValues}
