"""portable-cloud-aws: Amazon S3 (``s3://``), SQS (``sqs://``), AWS Batch (``batch://``) and a
DynamoDB idempotency store (``dynamodb://``) for portable.

Application code does not import this package: it opens URLs through
:func:`portable.storage.open_bucket` and friends, which find these drivers by
their entry points. See each module's docstring for URLs, options, limits,
native types and known differences.
"""

__all__: list[str] = []
