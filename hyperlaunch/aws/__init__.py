"""The only code that calls boto3: the client, SageMaker HyperPod, ECR."""
