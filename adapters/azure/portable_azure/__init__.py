"""Azure drivers for portable: Blob Storage / ADLS Gen2 and Storage Queues.

* ``az://`` and ``abfs://`` — :class:`portable_azure.blob.BlobStorage` (adlfs, azure-storage-blob)
* ``azqueue://`` — :class:`portable_azure.queue.StorageQueueMessaging` (azure-storage-queue)

Azure Service Bus and Event Hubs are not provided: no emulator runs here to
verify them (see ``docs/adapters/azure.md``).
"""

from ._common import AzureAuth

__all__ = ["AzureAuth"]
